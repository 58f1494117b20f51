"""schemas.columns.queue_index: each row's queue found by a lookup (issue 47), -1 for a queue not asked, the last
index where a queue is given twice. Expectations written by hand."""
import pyarrow as pa

from schemas.columns import queue_index


def test_each_row_gets_the_index_of_its_queue_and_minus_one_when_not_asked():
    table = pa.table({"topic": ["A", "B", "A", "C", "B", "A"], "queue_id": pa.array([0, 0, 1, 0, 3, -1], pa.int32())})
    queues = [("B", 3, 10, 20), ("A", 0), ("A", -1), ("Z", 0), ("B", 0)]
    assert queue_index(table, queues).tolist() == [1, 4, -1, -1, 0, 2]


def test_a_queue_given_twice_takes_its_last_index_and_nothing_asked_gives_minus_one():
    table = pa.table({"topic": ["A", "A"], "queue_id": pa.array([7, 2147483647], pa.int32())})
    assert queue_index(table, [("A", 7), ("B", 1), ("A", 7)]).tolist() == [2, -1]
    assert queue_index(table, [("A", 2147483647)]).tolist() == [-1, 0]
    assert queue_index(table, []).tolist() == [-1, -1]
    assert queue_index(table, [("B", 7)]).tolist() == [-1, -1]
