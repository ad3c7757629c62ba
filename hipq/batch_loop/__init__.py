"""The batch loop of a queue and what one tick uses.

Admission (the due read and the throttler chain), correlation of responses with
jobs in flight, the reports transports send back, and what a new owner recovers.
"""
