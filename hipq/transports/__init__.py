"""Transports send a claimed job's request and report what happened to the queue's loop."""

from hipq.transports.base import Reporter, Transport

__all__ = ["Reporter", "Transport"]
