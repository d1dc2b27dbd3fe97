"""The reboot phase: try-once boot configuration, the reboot itself, what `tune verify` checks
after it, and the containers restarted once it holds."""
