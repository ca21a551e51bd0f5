"""The run's members: who holds each place, what they reported, and the calls on them."""
