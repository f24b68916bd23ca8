"""GPU servers as Kubernetes pods: the spawner and the pure builders of its pod."""
