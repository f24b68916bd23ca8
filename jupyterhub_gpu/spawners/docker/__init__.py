"""GPU servers as Docker containers: the spawner and the pure builders of its container and network."""
