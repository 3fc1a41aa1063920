"""turborl's shared plumbing, installed as the package `turborl`. One room per concern:

- `turborl.cli`: the flags every script shares, their checks, user errors, the entry point, device, seeding
- `turborl.paths`: the execution path (eager, --compile, --cudagraphs, both)
- `turborl.envs`: building envs, carrying each step's results to the device, the episodes that end
- `turborl.torch_envs`: classic-control envs in torch, on the device
- `turborl.logger`: the run folder, metrics, progress and wandb
- `turborl.checkpoints`: checkpoints, resume, the exported policy
- `turborl.numerics`: running statistics and a parallel reverse scan, on the device (the PPO scripts)

Algorithms live in algos/, one file each.
"""
