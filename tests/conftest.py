"""torch on one CPU thread in each pytest process, as the scripts run it (--threads 1): the README's test command
runs two tests at a time, one per core of a 2-core machine."""

import torch

torch.set_num_threads(1)

# The slowest tests first, slowest of all first (the learning runs, each a minute or more on one core): the two
# workers take the next test as they finish one, so they end together instead of one running a long test alone.
SLOW_FIRST = ("test_every_seed_learns", "test_improves_on_pendulum", "test_measure_counts_every_seed",
              "test_learns_cartpole_without_velocities", "test_learns_pendulum", "test_a_segment_whose_call_was_killed",
              "test_resume_errors_are_one_clear_line", "test_seeds_share_a_process", "test_dqn_learns_cartpole")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.name.split("[")[0], len(SLOW_FIRST)))  # stable: the rest keep order
