"""detect: what a machine is (CPU features, memory, CPUs, tools), gathered once into a Host."""
