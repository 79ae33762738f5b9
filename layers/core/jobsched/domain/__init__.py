"""Pure domain: models, the run state machine, time and key rules. No I/O, no environment."""
