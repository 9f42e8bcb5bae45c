"""The usage loop's raw material: deliveries, delivery items, tool-use touches."""
