"""A Kubernetes API simulator with MCO actors, for the demo, the tests and the benchmarks."""
