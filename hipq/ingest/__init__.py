"""What comes in: jobs and responses turned into records and written.

A client's job becomes a ``NewJob`` (``job_intake``), a callback or a Kafka message a
``NewResponse`` (``response_intake``); single writes arriving together share one
transaction (``group_commit``).
"""
