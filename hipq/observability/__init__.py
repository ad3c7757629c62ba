"""What hipq tells operators: metrics, lifecycle log lines, traces, database faults."""
