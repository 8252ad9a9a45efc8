"""torch.distributed: gloo ranks started by tests/launch.py, and the launcher itself."""
