"""Subjects servers of a cluster send each other, in an internal account no client can
reach (see ``jetstream.ClusteredJetStream``)."""

INFO_SUBJECT = "$JSC.SI"  # .<account>.<stream>: the stream leader answers with its info
CONSUMER_INFO_SUBJECT = "$JSC.CI"  # .<account>.<stream>.<consumer>: the consumer leader's
RETIRE_SUBJECT = "$JSC.RET"  # .<account>.<stream>: sequences for the stream leader to retire
CONSUMER_DELETE_SUBJECT = "$JSC.CD"  # .<account>.<stream>.<consumer>: for the meta leader
