import ast
import gc
import inspect
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.helpers import ROOT, metric
from turborl.cli import RunArgs, UserError, check_run_args, pick_device
from turborl.envs import EpisodeStatsSyncVectorEnv, final_observations, finished_episodes, make_env, track_episodes
from turborl.link import EnvLink, EnvStep
from turborl.logger import RunLogger
from turborl.numerics import Normalization
from turborl.paths import ExecutionPath, inductor_option
from turborl.subprocess_envs import SubprocessVectorEnv, UnsharedSpace


def test_unknown_env_id_is_a_user_error():
    with pytest.raises(UserError, match="unknown env id 'NoSuchEnv-v0'"):
        make_env("NoSuchEnv-v0", 1, 0)


def test_action_space_checks():
    with pytest.raises(UserError, match="discrete action space"):
        make_env("Pendulum-v1", 1, 0, action="discrete", algo="DQN")
    with pytest.raises(UserError, match="continuous"):
        make_env("CartPole-v1", 1, 0, action="continuous", algo="TD3")


def test_episode_boundaries_and_statistics():
    """Same-step autoreset: the step that ends an episode reports the episode, and its final
    observation (the state reached) differs from the returned next observation (the new episode's first)."""
    envs = make_env("CartPole-v1", 2, seed=3)
    obs, _ = envs.reset(seed=3)
    steps, ended = 0, []
    while not ended:
        next_obs, reward, term, trunc, infos = envs.step(np.zeros(2, dtype=np.int64))  # always push left: falls fast
        steps += 1
        ended = finished_episodes(infos)
        real = final_observations(next_obs, infos)
    done = np.flatnonzero(term | trunc)
    assert len(ended) == len(done) > 0
    assert all(length == steps and ret == steps for ret, length in ended)  # CartPole pays 1 per step
    for i in done:
        assert not np.allclose(real[i], next_obs[i])
        assert abs(next_obs[i]).max() <= 0.05  # a fresh CartPole start
        assert abs(real[i][2]) > 0.2 or abs(real[i][0]) > 2.4  # the pole fell or the cart left
    envs.close()


@pytest.mark.parametrize("exceeded", [None, "steps", "keep"])
def test_episode_ring_returns_each_ended_episode_once(exceeded):
    """The ring read a step late (after_step, then read at the end) yields the episodes the torch envs report,
    in order; when more steps pass between two copies than it holds, those of the newest `steps`; when more
    episodes end than a read returns, the newest `keep`."""
    n_envs = {None: 8, "steps": 32, "keep": 128}[exceeded]
    envs = make_env("CartPole-v1", n_envs, seed=5, backend="torch", device="cpu")
    envs.reset(seed=5)
    ring = track_episodes("torch", n_envs, torch.device("cpu"), steps_per_read=1 if exceeded is None else 40)
    expected, got = [], []
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        _, _, _, _, infos = envs.step(torch.randint(0, 2, (n_envs,), generator=generator))
        ended = infos["_episode"].nonzero().flatten()
        reported = list(zip(infos["episode"]["r"][ended].tolist(), infos["episode"]["l"][ended].tolist(), strict=True))
        if exceeded is None:
            expected += reported
            got += ring.after_step(infos)
        else:  # no copy in between
            expected.append(reported)
            ring.record(infos)
    if exceeded is not None:
        ring.copy()
        expected = [episode for step in expected[-ring.steps:] for episode in step]
        assert (len(expected) > ring.keep) == (exceeded == "keep")
        expected = expected[-ring.keep:]
    got += ring.read()
    assert len(expected) > 50
    assert got == [(float(r), int(length)) for r, length in expected]
    assert ring.read() == []  # nothing twice


@pytest.mark.parametrize("enabled", [True, False])
def test_normalization_is_gymnasiums_normalize_observation_and_reward(enabled):
    """The statistics CleanRL's continuous PPO gets from gymnasium's NormalizeObservation and NormalizeReward
    (one env: CleanRL wraps each env before vectorizing), clipped as CleanRL clips them."""
    raw = gym.make("CartPole-v1")
    wrapped = gym.make("CartPole-v1")
    if enabled:
        wrapped = gym.wrappers.NormalizeReward(gym.wrappers.NormalizeObservation(wrapped), gamma=0.9)
    normalization = Normalization(enabled, (4,), 1, gamma=0.9, device=torch.device("cpu"))
    def same_obs(raw_obs, wrapped_obs):
        ours = normalization.obs(torch.as_tensor(raw_obs, dtype=torch.float32)[None], update=True)[0]
        np.testing.assert_allclose(ours.numpy(), np.clip(wrapped_obs, -10, 10), rtol=1e-4, atol=1e-4)

    same_obs(raw.reset(seed=3)[0], wrapped.reset(seed=3)[0])
    rng, episodes = np.random.default_rng(0), 0
    for _ in range(500):  # random actions: many episodes end, so the discounted return restarts
        action = int(rng.integers(0, 2))
        raw_obs, reward, terminated, truncated, _ = raw.step(action)
        wrapped_obs, wrapped_reward, _, _, _ = wrapped.step(action)
        same_obs(raw_obs, wrapped_obs)
        ours = normalization.reward(torch.tensor([reward], dtype=torch.float32), torch.tensor([float(terminated)]))
        np.testing.assert_allclose(ours.numpy(), np.clip([wrapped_reward], -10, 10), rtol=1e-4, atol=1e-5)
        if terminated or truncated:
            episodes += 1
            same_obs(raw.reset()[0], wrapped.reset()[0])
    assert episodes > 10
    if enabled:  # the statistics moved: the comparison was not of identities
        assert normalization.obs_rms.count > 500 and not torch.allclose(normalization.obs_rms.var, torch.ones(4))
        assert wrapped_reward != reward
    else:
        assert normalization.obs_rms.count < 1  # untouched


def episodes_of_the_same_answers(ours, theirs, steps: int = 700) -> int:
    """Reset both vector envs alike and step them with the same random actions, asserting the same answers at every
    step: observations, rewards, episode ends, final observations and episode records. Returns the episodes ended."""
    np.testing.assert_array_equal(ours.reset(seed=5)[0], theirs.reset(seed=5)[0])
    theirs.action_space.seed(0)
    ended = 0
    for _ in range(steps):
        actions = theirs.action_space.sample()
        mine, gyms = ours.step(actions), theirs.step(actions)
        for a, b in zip(mine[:4], gyms[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        assert ("final_obs" in mine[4]) == ("final_obs" in gyms[4])
        if "final_obs" in gyms[4]:
            np.testing.assert_array_equal(final_observations(mine[0], mine[4]), final_observations(gyms[0], gyms[4]))
        assert finished_episodes(mine[4]) == finished_episodes(gyms[4])
        ended += len(finished_episodes(gyms[4]))
    return ended


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0", "Pendulum-v1"])
def test_our_vector_env_answers_as_gymnasiums_with_episode_statistics(env_id, threads):
    """make_env's vector env against gymnasium's SyncVectorEnv (same-step autoreset) wrapped in its
    RecordEpisodeStatistics, step for step: terminations (CartPole), time limits (MountainCar, Pendulum), Box
    actions (Pendulum); with 2 threads (--env-threads), envs 0-1 step in the caller's thread and env 2 in
    another."""
    factories = [lambda: gym.make(env_id) for _ in range(3)]
    ours = make_env(env_id, 3, seed=5, threads=threads)
    assert isinstance(ours, EpisodeStatsSyncVectorEnv)
    stepped_in = [set() for _ in ours.envs]
    for env, threads_seen in zip(ours.envs, stepped_in, strict=True):
        env.step = lambda action, step=env.step, seen=threads_seen: seen.add(threading.get_ident()) or step(action)
    theirs = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.vector.SyncVectorEnv(factories, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
    assert episodes_of_the_same_answers(ours, theirs) >= 6  # episodes ended in every env: it crossed autoresets
    caller = {threading.get_ident()}
    assert stepped_in[0] == stepped_in[1] == caller
    assert (stepped_in[2] == caller) if threads == 1 else (len(stepped_in[2]) == 1 and stepped_in[2] != caller)
    ours.close()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Hopper-v4"])
def test_envs_in_subprocesses_answer_as_the_envs_stepped_here(env_id):
    """--async-envs (common/subprocess_envs.py: each env in a subprocess, answers in shared memory) against the
    loop's own vector env, step for step: terminations (CartPole, Hopper), time limits (Pendulum), discrete and Box
    actions, MuJoCo; the final observations and episode records of every autoreset."""
    ours, here = make_env(env_id, 3, seed=5, asynchronous=True), make_env(env_id, 3, seed=5)
    assert isinstance(ours, SubprocessVectorEnv) and len({p.pid for p in ours._processes} | {os.getpid()}) == 4
    assert episodes_of_the_same_answers(ours, here) >= 6  # episodes ended: the comparison crossed autoresets
    processes = ours._processes
    ours.close()
    here.close()
    assert not any(p.is_alive() for p in processes)


class BreaksAtStep3(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, breaks: bool):
        self.breaks, self.steps = breaks, 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.breaks and self.steps == 3:
            raise ValueError("the simulator broke")
        return np.zeros(2, dtype=np.float32), 1.0, False, False, {}


def test_an_env_that_fails_or_dies_in_its_subprocess_is_one_error_that_names_it():
    envs = SubprocessVectorEnv([lambda: BreaksAtStep3(False), lambda: BreaksAtStep3(True)])
    envs.reset(seed=0)
    envs.step(np.zeros(2, dtype=np.int64))
    envs.step(np.zeros(2, dtype=np.int64))
    processes = envs._processes
    with pytest.raises(RuntimeError, match=r"env 1 \(in a subprocess of --async-envs\) failed: ValueError: the "
                                           r"simulator broke"):
        envs.step(np.zeros(2, dtype=np.int64))
    assert envs.closed and not any(p.is_alive() for p in processes)  # the others closed with it

    envs = SubprocessVectorEnv([lambda: BreaksAtStep3(False)] * 2)
    envs.reset(seed=0)
    os.kill(envs._processes[1].pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"env 1 .* failed: its subprocess exited \(code -9\)"):
        envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(UnsharedSpace):  # make_env refuses such envs, as no script here takes them (test_bad_input)
        SubprocessVectorEnv([lambda: gym.make("Blackjack-v1")])


def test_envs_in_subprocesses_stay_in_step_after_a_refused_request_and_close_after_an_interrupted_one(monkeypatch):
    """A request refused before it is sent (a value per env missing, a value that cannot be pickled) leaves every
    env answering its own requests; a step interrupted while it waited (Ctrl-C caught around it) leaves answers
    unread, so the next request closes the envs and says so, instead of reading the old answers."""
    envs = SubprocessVectorEnv([lambda: BreaksAtStep3(False)] * 2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="1 values for 2 envs"):
        envs.reset(seed=[1])
    with pytest.raises(TypeError):
        envs.set_attr("lock", threading.Lock())
    envs.step(np.zeros(2, dtype=np.int64))
    assert envs.call("steps") == (1, 1)  # through the wrappers, as gymnasium's vector envs
    monkeypatch.setattr(os, "read", lambda fd, n: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        envs.step(np.zeros(2, dtype=np.int64))
    monkeypatch.undo()
    processes = envs._processes
    with pytest.raises(RuntimeError, match="interrupted while they stepped"):
        envs.step(np.zeros(2, dtype=np.int64))
    assert envs.closed and not any(p.is_alive() for p in processes)


def test_threaded_envs_pickle_for_a_checkpoint_and_go_on_as_they_were():
    """A checkpoint pickles classic-control envs whole: the thread pool is made again on loading, and the loaded
    envs step on from where the saved ones were."""
    import pickle

    import cloudpickle

    envs = make_env("CartPole-v1", 3, seed=1, threads=2)
    envs.reset(seed=1)
    for _ in range(30):
        envs.step(np.array([0, 1, 1]))
    loaded = pickle.loads(cloudpickle.dumps(envs))
    assert loaded.threads == 2
    loaded.share_among(3)  # a resume with another --env-threads: the envs step on, in its threads
    stepped_in = set()
    env_step = loaded.envs[2].step
    loaded.envs[2].step = lambda action: stepped_in.add(threading.get_ident()) or env_step(action)
    rng, ended = np.random.default_rng(0), 0
    for _ in range(200):
        actions = rng.integers(0, 2, 3)
        saved_run, loaded_run = envs.step(actions), loaded.step(actions)
        for a, b in zip(saved_run[:4], loaded_run[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        ended += len(finished_episodes(loaded_run[4]))
    assert ended > 3 and stepped_in and threading.get_ident() not in stepped_in  # env 2: in the pool's threads
    assert [list(share) for share in loaded._shares] == [[0], [1], [2]]
    envs.close(), loaded.close()


def test_vector_env_speed_measures_each_way_of_stepping(tmp_path):
    from scripts import vector_env_speed

    out = tmp_path / "speed.json"
    modes = ["sync", "async", "threads", "gymnasium-async"]
    vector_env_speed.main(vector_env_speed.Args(env_ids=["Pendulum-v1"], num_envs=[2], modes=modes, seconds=0.2,
                                                out=str(out)))
    rows = json.load(open(out))["rows"]
    assert [(row["env_id"], row["num_envs"], row["mode"]) for row in rows] == [("Pendulum-v1", 2, m) for m in modes]
    assert all(row["env_steps_per_second"] > 0 and row["run_cpu_us_per_step"] > 0 for row in rows)
    with pytest.raises(UserError, match="--modes processes: choose from sync, async, threads, gymnasium-async"):
        vector_env_speed.main(vector_env_speed.Args(modes=["sync", "processes"]))


def test_seeded_envs_repeat():
    a = make_env("CartPole-v1", 2, seed=7).reset(seed=7)[0]
    b = make_env("CartPole-v1", 2, seed=7).reset(seed=7)[0]
    np.testing.assert_array_equal(a, b)


def test_cudagraphs_without_cuda_warns_and_falls_back(capsys):
    path = ExecutionPath(RunArgs(cudagraphs=True), torch.device("cpu"))
    assert "--cudagraphs needs a CUDA device" in capsys.readouterr().err
    assert not path.capturing and not path.capturable

    def f(x):
        return x + 1

    assert path.capture(f) is f and path.compile(f) is f  # eager: the functions themselves
    ExecutionPath(RunArgs(), torch.device("cpu"))
    assert capsys.readouterr().err == ""


def test_tf32_is_each_runs_own_choice():
    """--tf32 sets torch's float32 matmul precision for the run, and a run without it gets float32's back (the
    tests run many scripts' mains in one process)."""
    try:
        ExecutionPath(RunArgs(tf32=True), torch.device("cpu"))
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        ExecutionPath(RunArgs(), torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == "highest"


def test_pick_device_cpu():
    assert pick_device(False).type == "cpu"


def test_compiled_function_freezes_what_compiling_left_for_the_gc():
    gc.unfreeze()
    try:
        torch._dynamo.reset()
        fast = ExecutionPath(RunArgs(compile=True), torch.device("cpu")).compile(lambda x: x * 2 + 1)
        assert gc.get_freeze_count() == 0
        for _ in range(2):
            torch.testing.assert_close(fast(torch.ones(3)), torch.full((3,), 3.0))
        assert gc.get_freeze_count() > 0  # frozen after the compiling calls, not rescanned in the loop
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("envs_on_device", [False, True])
def test_env_link_carries_each_field_by_name(envs_on_device):
    link = EnvLink(2, 3, (), torch.long, torch.device("cpu"), envs_on_device=envs_on_device)
    make = torch.as_tensor if envs_on_device else np.asarray
    link.reset(make(np.ones((2, 3), np.float32)))
    step = link.receive()
    assert not link.answered and torch.equal(step.next_obs, torch.ones(2, 3))  # a first obs: nothing to store
    link.send(EnvStep(make([1.0, 2.0]), make([True, False]), make([False, True]), make(np.zeros((2, 3))),
                      make(np.full((2, 3), 5.0))))
    step = link.receive()
    assert link.answered and step.reward.tolist() == [1.0, 2.0]
    assert step.terminated.tolist() == [1.0, 0.0] and step.truncated.tolist() == [0.0, 1.0]
    assert step.final_obs.sum() == 0 and step.next_obs.sum() == 30
    link.send_action(torch.tensor([1, 2]))
    link.action_queued()
    assert list(link.action()) == [1, 2] and isinstance(link.action(), torch.Tensor) == envs_on_device
    saved, link.answered = link.state_dict(), False
    link.load_state_dict(saved)  # a checkpoint holds an answer not yet stored
    assert link.answered and link.receive().reward.tolist() == [1.0, 2.0]


@dataclass
class _Args:
    env_id: str = "Test-v0"
    seed: int = 0
    track: bool = False


def test_run_logger_writes_metrics_and_summary(tmp_path):
    logger = RunLogger(_Args(), "algo", total_steps=3000, device=torch.device("cpu"), run_root=str(tmp_path))
    logger.log(10, loss=0.5)
    logger.log_episodes(20, [(12.0, 12)])
    for step in range(100, 3001, 100):
        time.sleep(0.001)
        logger.progress(step)
    training_seconds = logger._progress_time - logger._first_progress[1]
    time.sleep(0.05)  # after the loop (saving, exporting): not training time
    summary = logger.close()
    assert summary["sps"] == pytest.approx(2900 / training_seconds)
    assert metric(logger.dir, "loss") == [0.5]
    assert metric(logger.dir, "episodic_return") == [12.0]
    assert len(metric(logger.dir, "sps")) == 2  # windows of 1000 steps from the first progress on
    assert summary["mean_return_last20"] == 12.0
    args = json.load(open(os.path.join(logger.dir, "args.json")))
    assert args["env_id"] == "Test-v0" and args["device"] == "cpu"  # the device used, not the --cuda wish
    saved = json.load(open(os.path.join(logger.dir, "summary.json")))
    assert saved["steps"] == 3000 and saved["status"] == "done" and saved["checkpoint"] is None
    assert saved["peak_gpu_memory_mb"] is None  # a CPU run (tests/test_gpu.py checks a CUDA run's)


def test_the_progress_line_shows_the_recent_rate(tmp_path, monkeypatch, capsys):
    """A slow start (compiling, or steps before learning) must not hold the displayed rate down for a window."""
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    logger = RunLogger(_Args(), "algo", total_steps=1_000_000, device=torch.device("cpu"), run_root=str(tmp_path),
                       print_every=10)
    logger.progress(1)
    clock[0] += 100
    logger.progress(100)  # the first 100 steps took 100 s
    clock[0] += 11
    logger.progress(11_100)  # then 1,000 steps/s
    logger.log_episodes(11_100, [(3.0, 10), (5.0, 10)])
    clock[0] += 11
    logger.progress(12_100)
    logger.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[1:] for line in lines] == [
        ["sps 1", "no episode ended"], ["sps 1000", "no episode ended"], ["sps 91", "return(last 2) 4.0"]]


def test_the_progress_bar_shows_a_return_once_an_episode_ended(tmp_path, monkeypatch):
    import tqdm

    postfixes = []
    monkeypatch.setattr(tqdm.tqdm, "set_postfix", lambda bar, **shown: postfixes.append(shown))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the bar, not the lines
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    logger = RunLogger(_Args(), "algo", total_steps=1000, device=torch.device("cpu"), run_root=str(tmp_path))
    for step in (10, 20, 30):
        clock[0] += 1
        logger.progress(step)
        if step == 20:
            logger.log_episodes(step, [(20.0, 10)])
    logger.close()
    assert [sorted(shown) for shown in postfixes] == [["sps"], ["sps"], ["ret", "sps"]]
    assert postfixes[-1]["ret"] == "20.0"


def test_run_folders_are_unique_even_when_runs_start_in_the_same_second(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    loggers = [RunLogger(_Args(), "algo", 100, device="cpu", run_root=str(tmp_path)) for _ in range(3)]
    assert len({logger.dir for logger in loggers}) == 3
    for logger in loggers:
        logger.close()
        assert os.path.exists(os.path.join(logger.dir, "summary.json"))


def test_summary_is_strict_json_when_no_episode_ended(tmp_path):
    logger = RunLogger(_Args(), "algo", 100, device="cpu", run_root=str(tmp_path))
    logger.progress(50)
    logger.close()

    def refuse(constant):
        raise ValueError(f"summary.json holds {constant}")

    with open(os.path.join(logger.dir, "summary.json")) as f:
        assert json.load(f, parse_constant=refuse)["mean_return_last20"] is None


def test_inductor_options_are_read_by_name_with_values_of_their_type():
    config = torch._inductor.config
    defaults = (config.combo_kernels, config.triton.enable_pdl, config.max_fusion_size)
    options = [inductor_option(o) for o in ("combo_kernels=True", "triton.enable_pdl=True",
                                            "max_fusion_size=32")]
    assert options == [("combo_kernels", True), ("triton.enable_pdl", True), ("max_fusion_size", 32)]
    name, value = inductor_option("cpu_gpu_bw=50")  # a float option: torch.compile takes no int for it
    assert (name, value, type(value)) == ("cpu_gpu_bw", 50.0, float)
    for bad in ("combo_kernels", "combo_kernels=1", "combo_kernels=yes", "triton=True", "triton.no_such=1"):
        with pytest.raises(UserError, match="--inductor"):
            inductor_option(bad)
    assert (config.combo_kernels, config.triton.enable_pdl, config.max_fusion_size) == defaults


def test_a_runs_inductor_options_reach_its_compiles_and_no_later_run():
    """cpp.simdlen=1 turns off the vectorized C++ (at::vec) inductor writes for a CPU kernel: visible in the code."""
    from torch._inductor.utils import run_and_get_code

    def vectorized(args: RunArgs) -> bool:
        torch._dynamo.reset()
        check_run_args(args)
        compiled = ExecutionPath(args, torch.device("cpu")).compile(lambda x: x.sin() + 1)
        _, code = run_and_get_code(compiled, torch.randn(1000))
        return "at::vec" in "".join(code)

    assert not vectorized(RunArgs(compile=True, inductor=["cpp.simdlen=1"]))
    assert vectorized(RunArgs(compile=True)) and torch._inductor.config.cpp.simdlen is None


def test_scripts_run_torch_on_one_thread_unless_told():
    """Tiny networks on a shared CPU: one thread by default (results/experiments/cpu-threads), --threads to raise it."""
    from turborl.cli import cli

    seen = []

    def main(args):
        seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        cli(main, RunArgs, [])
        cli(main, RunArgs, ["--threads", "2"])
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]


@pytest.mark.parametrize("script", ["algos/td3.py", "scripts/long_runs.py"])
def test_each_flag_help_is_its_docstring_in_one_paragraph(script):
    # tyro keeps the line breaks of an indented multi-line field docstring; turborl.cli.parse joins them
    docstrings = []
    for path in [os.path.join(ROOT, script), *[os.path.join(ROOT, "common", "cli.py")] * script.startswith("algos")]:
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ClassDef) and node.name in ("Args", "RunArgs"):
                docstrings += [inspect.cleandoc(after.value.value) for field, after in itertools.pairwise(node.body)
                               if isinstance(field, ast.AnnAssign) and isinstance(after, ast.Expr)
                               and isinstance(after.value, ast.Constant) and "\n" in after.value.value]
    assert len(docstrings) >= 3
    shown = subprocess.run([sys.executable, os.path.join(ROOT, script), "--help"], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "4000"}, cwd=ROOT, check=True).stdout.splitlines()
    for doc in docstrings:
        paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]
        assert all(any(p in line for line in shown) for p in paragraphs), doc
    if script.startswith("algos"):  # the description: a line per paragraph, one blank line between (tyro put two
        doc = ast.get_docstring(ast.parse(open(os.path.join(ROOT, script)).read()))  # before a paragraph that
        paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]  # starts with a backtick)
        start = shown.index(paragraphs[0])
        assert shown[start:start + 2 * len(paragraphs) - 1] == [line for p in paragraphs for line in (p, "")][:-1]


def test_mujoco_envs_build_without_mujocos_deprecation_warning_of_gymnasiums_model_files(capfd):
    # MuJoCo 4 printed "compiler attribute 'settotalmass' is deprecated" for each HalfCheetah env it built, in the
    # run's process and in each subprocess of --async-envs
    for asynchronous in (False, True):
        envs = make_env("HalfCheetah-v4", 2, seed=0, asynchronous=asynchronous)
        envs.reset(seed=0)
        envs.close()
    assert "deprecated" not in capfd.readouterr().err
