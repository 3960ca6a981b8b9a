"""What starts and drives the simulated cluster: the cluster, agent processes, the demo,
``serve``, chaos runs and their checker, and the real control plane's launcher."""
