"""The pure vocabulary the rest speaks: pods, Nodes, label and build-pod selectors, image
references and what MCO's objects foretell of them (``replacement``), alert answers, the API
operations and watch states, durations and exit codes."""
