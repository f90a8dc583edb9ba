import uuid

import numpy as np

from knowledge.index import empty_matrix


def rows(count: int, value: float) -> np.ndarray:
    return np.full((count, 256), value, dtype=np.float32)


def test_appends_grow_the_matrix_and_leave_earlier_snapshots_as_they_were():
    first, second = uuid.uuid4(), uuid.uuid4()
    small = empty_matrix(1).appended(2, [first] * 3, [1, 2, 3], rows(3, 1.0))
    grown = small.appended(3, [second] * 2000, list(range(4, 2004)), rows(2000, 2.0))
    assert (small.size, small.stamp) == (3, 2)
    assert np.array_equal(small.vectors, rows(3, 1.0))
    assert (grown.size, grown.stamp) == (2003, 3)
    assert grown.ids.tolist() == list(range(1, 2004))
    assert grown.vectors.flags.c_contiguous
    assert np.array_equal(grown.vectors[3:], rows(2000, 2.0))


def test_removing_a_document_keeps_the_rows_of_the_others_in_order():
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    matrix = empty_matrix(1).appended(2, [first, second, first, third], [1, 2, 3, 4],
                                      np.arange(4 * 256, dtype=np.float32).reshape(4, 256))
    without = matrix.without(3, {first})
    assert without.ids.tolist() == [2, 4]
    assert np.array_equal(without.vectors, matrix.vectors[[1, 3]])
    assert set(without.documents) == {second, third}
    assert matrix.without(4, None).size == 0
    again = without.appended(5, [first], [5], rows(1, 9.0))
    assert again.ids.tolist() == [2, 4, 5]
    assert again.without(6, {first}).ids.tolist() == [2, 4]
