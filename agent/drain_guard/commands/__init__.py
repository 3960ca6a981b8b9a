"""The cluster-side commands ``drain-guard status | hold | release | preflight``: operator
tools that talk to the API with the caller's own credentials (``--kubeconfig`` /
``KUBECONFIG`` / in-cluster), so RBAC decides who may hold or release. One module per
command, :mod:`.base` what they share.
"""
