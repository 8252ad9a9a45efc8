import torch

from sbdata.engine._pool import Pool


def piece(start: int, stop: int):
    return (torch.arange(start, stop), [f"k{i}" for i in range(start, stop)])


def test_pool_cuts_exact_batches_in_arrival_order():
    pool = Pool(4)
    pool.add(piece(0, 3), 3)
    assert pool.pop_full() is None and len(pool) == 3
    pool.add(piece(3, 9), 6)
    first = pool.pop_full()
    assert first[0].tolist() == [0, 1, 2, 3] and first[1] == ["k0", "k1", "k2", "k3"]
    second = pool.pop_full()
    assert second[0].tolist() == [4, 5, 6, 7]
    assert pool.pop_full() is None and len(pool) == 1
    rest = pool.pop_rest()
    assert rest[0].tolist() == [8] and rest[1] == ["k8"] and len(pool) == 0
    assert pool.pop_rest() is None


def test_pool_ignores_empty_pieces_and_round_trips_state():
    pool = Pool(3)
    pool.add(piece(0, 0), 0)
    pool.add(piece(0, 2), 2)
    other = Pool(3)
    other.load_state_dict(pool.state_dict())
    other.add(piece(2, 4), 2)
    assert other.pop_full()[0].tolist() == [0, 1, 2]
    assert len(other) == 1


def test_pool_clear():
    pool = Pool(2)
    pool.add(piece(0, 1), 1)
    pool.clear()
    assert len(pool) == 0 and pool.pop_rest() is None
