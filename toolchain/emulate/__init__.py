"""Running another architecture's Python under qemu-user, in a Debian root of its own."""
