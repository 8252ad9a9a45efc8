"""A suite nobody tuned on: scikit-learn's 8x8 digits, a small CNN, the user's recipe against selection."""
