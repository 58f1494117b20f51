"""The task pipeline the replay job and the data source share: the driver's plan (what to read, the window, the
commit log cut into splits) and a task's work on one split (its consume-queue units, the records decoded under the
corruption policy, batch by batch). Deciding a batch is filtering.decision's."""
