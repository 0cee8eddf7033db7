"""Leaderboards and plots generated from run directories alone (`unlearnbench leaderboard`)."""
