"""Trainer integrations (Lightning, Transformers, Accelerate), their jobs launched in fresh processes."""
