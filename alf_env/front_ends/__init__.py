"""The front ends, each thin over the control and data planes."""
