"""torch on one CPU thread in each pytest process, as the scripts run it (--threads 1): the README's test command
runs two tests at a time, one per core of a 2-core machine."""

import torch

torch.set_num_threads(1)

# The slowest tests first, slowest of all first (the learning runs, each a minute or more on one core): the two
# workers take the next test as they finish one, so they end together instead of one running a long test alone.
SLOW_FIRST = ("test_every_seed_learns", "test_improves_on_pendulum", "test_learns_cartpole_without_velocities",
              "test_dqn_learns_cartpole", "test_evaluate_takes_a_run_folder", "test_ctrl_c_mid_rollout_stops",
              "test_a_segment_whose_call_was_killed", "test_resume_errors_are_one_clear_line",
              "test_two_ranks_keep_identical_parameters", "test_learns_pendulum", "test_measure_counts_every_seed",
              "test_seeds_share_a_process")


def pytest_collection_modifyitems(items):
    def rank(item) -> int:  # a name's place by its prefix in SLOW_FIRST; the rest after, in their order (stable)
        return next((i for i, prefix in enumerate(SLOW_FIRST) if item.name.startswith(prefix)), len(SLOW_FIRST))

    items.sort(key=rank)
