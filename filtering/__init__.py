"""Filtering exactly as an Apache RocketMQ broker does: tags, SQL92, bloom filter, two-stage filter, dispatcher."""
