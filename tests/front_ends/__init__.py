"""The front ends (SBLoader, SBCollator, the torchdata node, the WebDataset stage, the functional API) and
exact resume through each of them."""
