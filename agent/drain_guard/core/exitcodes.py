"""The exit codes of every drain-guard program and command, in one place: 0 done (or stopped
by a signal), 1 a failure (a crash for the supervisor to restart, a command that could not do
what it was asked), 2 an invalid setting or usage (the CLI's, a bad kubeconfig, a listener
that cannot be opened, a failed start-up check)."""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
