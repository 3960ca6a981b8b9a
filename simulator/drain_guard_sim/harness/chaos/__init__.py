"""Chaos runs: the simulated cluster, one real agent process per node, and faults from a seed.

A run (``run_chaos``) starts a ``SimCluster`` (MCO 4.15, 4.16 or 4.18 actors, by seed; on-cluster
builds, scaled time), one ``drain-guard run`` subprocess per node with its own identity, and plays
a fault schedule drawn from the seed (``make_schedule``): MachineConfig rollouts (each starts a
build), API latency and 500/429/503 replies, watch streams cut, forced 410s, agents killed
with SIGKILL and restarted, the MCD restarted mid-wait, operators releasing holds with
``drain-guard release``, builds that fail (their pod deleted), hosts whose booted image cannot
be read. Then it brings the cluster to rest (faults off, every agent up, one last rollout
that must complete) and hands the simulator's whole write log to ``checker``.

The schedule is a pure function of the seed, so a failing seed replays the same actions in
the same order; the exact interleaving with the agents' processes and the actors' timers
still varies from run to run (real processes, real time), so a seed that failed once may
need a few replays. A failure prints the seed, the schedule and a short timeline of the
node concerned.

``run_soak`` measures one agent's RSS and open file descriptors over thousands of watch
events (pod churn and node updates); it is a measurement, not a timed test.

The parts: ``schedule`` (the config and the seed's actions), ``agents`` (the agent processes),
``faults`` (playing each action), ``verdict`` (the checker's input and a failure's timelines),
``run`` (the order of a run and its report), ``soak``, and the command line (``__main__``).

Command line::

    python -m drain_guard_sim.harness.chaos run --seeds 20 [--first 1]   # summary of a long run
    python -m drain_guard_sim.harness.chaos run --seed 17        # one seed, with its schedule
    python -m drain_guard_sim.harness.chaos soak --events 5000
"""

from drain_guard_sim.harness.chaos.run import ChaosReport, run_chaos
from drain_guard_sim.harness.chaos.schedule import Action, ChaosConfig, make_schedule
from drain_guard_sim.harness.chaos.soak import SoakReport, run_soak

__all__ = [
    "Action",
    "ChaosConfig",
    "ChaosReport",
    "SoakReport",
    "make_schedule",
    "run_chaos",
    "run_soak",
]
