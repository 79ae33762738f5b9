"""Services: the scheduler's use cases, written against adapters and ports only."""
