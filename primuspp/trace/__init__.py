"""The timeline model shared by simulated and real runs, and its file formats."""

from primuspp.trace.metrics import Metrics, RankMetrics, timeline_metrics
from primuspp.trace.timeline import Interval, RankTimeline, Timeline, Transfer

__all__ = ["Interval", "Metrics", "RankMetrics", "RankTimeline", "Timeline", "Transfer", "timeline_metrics"]
