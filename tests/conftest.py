"""torch on one CPU thread in each pytest process, as the scripts run it (--threads 1): the README's test command
runs two tests at a time, one per core of a 2-core machine."""

import torch

torch.set_num_threads(1)
