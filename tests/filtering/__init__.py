"""Tests of filtering/: each RocketMQ filter checked against the reference vectors in tests/data."""
