"""The pure vocabulary the rest speaks: pods, Nodes, label and build-pod selectors, image
references, alert answers, the API operations and watch states, durations and exit codes."""
