"""Tests of metrics, status, the HTTP server, Node events and alert rules."""
