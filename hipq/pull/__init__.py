"""Pull workers: job types whose jobs are run by workers that ask for them.

The queue's owner admits and claims a pull job as any other (``transport``); a
fetch in any process hands claimed jobs to a worker with an attempt token
(``hipq.store.pull_claims``, woken by ``waiters``); the worker's reports travel as
an external system's do, through the inbox and the heartbeats (``reports``), and the
owner settles them at its tick.
"""
