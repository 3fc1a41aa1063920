"""Does ale-py's AtariVectorEnv, as common/atari.py sets it up, play the game that envpool plays as CleanRL sets it up?

    python results/experiments/atari-env/semantics.py ale-py BeamRider > ale-py.json    # turborl's env (ale-py)
    python results/experiments/atari-env/semantics.py envpool BeamRider > envpool.json  # envpool's, CleanRL's flags

Prints one JSON: whole games (across lost lives) under uniform random actions (64 games) and under NOOP alone (16),
their mean score, length and episodes (lives) per game, with the unclipped score; and, from a start without no-ops,
3,000 steps of one fixed random action sequence: a CRC of each step's newest frame, its reward and its episode end,
so that two outputs can be compared step by step.
"""

import json
import sys
import zlib

import numpy as np

backend, game = sys.argv[1], sys.argv[2]
NUM_ENVS = 16


def make(num_envs: int, noop_max: int):
    if backend == "envpool":  # ppo_atari_envpool.py's call; envpool's defaults do the rest
        import envpool

        return envpool.make(f"{game}-v5", env_type="gym", num_envs=num_envs, episodic_life=True, reward_clip=True,
                            seed=1, noop_max=noop_max)
    import ale_py.vector_env

    from turborl.atari import make_envs

    scripts_env = ale_py.vector_env.AtariVectorEnv  # the scripts' own setup (make_envs), noop_max alone changed
    ale_py.vector_env.AtariVectorEnv = lambda *args, **kwargs: scripts_env(*args, **{**kwargs, "noop_max": noop_max})
    try:
        return make_envs(f"{game}-v5", num_envs, 2)
    finally:
        ale_py.vector_env.AtariVectorEnv = scripts_env


def reset(envs):
    return envs.reset() if backend == "envpool" else envs.reset(seed=1)


def whole_games(policy: str, count: int) -> dict:
    envs = make(NUM_ENVS, 30)
    _, info = reset(envs)
    rng = np.random.default_rng(0)
    n_actions = envs.action_space[0].n if backend == "ale-py" else envs.action_space.n
    if backend == "ale-py":
        from turborl.atari import Games

        scripts_games = Games(NUM_ENVS, info["lives"])  # the scripts' own count of whole games
    score, length, episodes = np.zeros(NUM_ENVS), np.zeros(NUM_ENVS, dtype=int), np.zeros(NUM_ENVS, dtype=int)
    games = []
    while len(games) < count:
        action = rng.integers(0, n_actions, NUM_ENVS) if policy == "random" else np.zeros(NUM_ENVS, dtype=int)
        _, reward, terminated, truncated, info = envs.step(action)
        episodes += terminated | truncated
        if backend == "envpool":  # the unclipped reward is in its info, and info's "terminated" is the game's end
            score += info["reward"]
            length += 1
            over = info["terminated"].astype(bool) | truncated
            finished = [(score[i], length[i]) for i in np.flatnonzero(over)]
        else:
            finished = scripts_games.after_step(reward, terminated | truncated, info["lives"])
            over = scripts_games.length == 0  # the games it just ended start their count again
        games += [(*game_end, episodes[i]) for game_end, i in zip(finished, np.flatnonzero(over), strict=True)]
        score[over], length[over], episodes[over] = 0, 0, 0
    scores, lengths, lives_lost = (np.array(column, dtype=float) for column in zip(*games[:count], strict=True))
    return {"games": count, "actions": int(n_actions), "score_mean": scores.mean(),
            "score_sem": scores.std() / count ** 0.5, "length_mean": lengths.mean(),
            "length_sem": lengths.std() / count ** 0.5, "episodes_per_game": lives_lost.mean()}


def fixed_sequence(steps: int) -> dict:
    envs = make(1, 1 if backend == "envpool" else 0)  # no no-ops at reset (envpool draws from 0..noop_max-1)
    frames, _ = reset(envs)
    actions = np.random.default_rng(0).integers(0, 9, steps)
    crcs, rewards, ends = [zlib.crc32(frames[0, -1].tobytes())], [], []
    for action in actions:
        frames, reward, terminated, truncated, info = envs.step(np.array([action]))
        crcs.append(zlib.crc32(frames[0, -1].tobytes()))
        rewards.append(float(info["reward"][0] if backend == "envpool" else reward[0]))
        ends.append(bool(terminated[0] or truncated[0]))
    return {"frame_crc": crcs, "reward": rewards, "episode_end": ends}


print(json.dumps({"backend": backend, "game": game, "random": whole_games("random", 64),
                  "noop": whole_games("noop", 16), "fixed_sequence": fixed_sequence(3000)}))
