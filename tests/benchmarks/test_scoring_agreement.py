"""The scoring-agreement benchmark's smoke: every suite measured, agreements are shares in [0, 1], and a table."""

import json

from benchmarks.scoring_agreement.run import KEEPS, main, measure


def test_scoring_agreement_smoke(tmp_path):
    assert main(["--smoke", "--out", str(tmp_path), "--suites", "mlp", "lm"]) == 0
    found = json.loads((tmp_path / "all" / "summary.json").read_text())
    assert set(found) == {"mlp", "lm"} and all(found.values())
    for points in found.values():
        for point in points:
            for keep in map(str, KEEPS):
                assert 0 <= point[keep]["lowest"] <= point[keep]["mean"] <= 1
    assert (tmp_path / "all" / "table.md").read_text().startswith("| suite | at |")


def test_the_same_scorer_twice_agrees_exactly():
    """A model without autocast-affected ops scores the same at both precisions: agreement 1 at every keep."""
    import torch

    class Identity(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            return x * self.w  # elementwise: autocast leaves it in float32

    batches = [(torch.randn(64, 10), torch.randint(0, 10, (64,))) for _ in range(3)]
    found = measure(Identity(), batches)
    assert all(found[str(k)] == {"mean": 1.0, "lowest": 1.0} for k in KEEPS)
