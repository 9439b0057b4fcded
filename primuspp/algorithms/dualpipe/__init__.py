"""DualPipe and DualPipe-V."""
