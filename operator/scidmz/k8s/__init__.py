"""scidmz.k8s."""
