"""The driver's plan, before Spark: the brokers, their stores and config, the window, where each queue's units come
from (units/), and the commit log cut into splits (replay_plan.py). build.py makes one broker's plan, cluster.py a
run's over every broker."""
