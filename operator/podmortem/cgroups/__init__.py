"""Memory cgroups: finding them, reading them, and making throwaway ones for real-kernel runs."""
