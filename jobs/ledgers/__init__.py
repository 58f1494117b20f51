"""Ledgers: what the store's system topics tell about messages beyond a filter's verdict (the timer wheel, POP), each
its events from a task's batches, one Spark join after the stage, and its table merged across nights (lake.py)."""
