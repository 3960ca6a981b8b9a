"""drain-guard: hold OpenShift MCO drain requests while a drain would be harmful or pointless."""

__version__ = "0.1.0"
