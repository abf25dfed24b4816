"""Monitoring: what the data is (``data``, ``health``) and how it is served (``http`` on the
monitoring port, ``sysreq`` as ``$SYS.REQ.SERVER.*`` requests in the system account)."""

from jetraft.server.monitor.data import MonitorData
from jetraft.server.monitor.http import MonitorServer
from jetraft.server.monitor.sysreq import SystemRequests

__all__ = ["MonitorData", "MonitorServer", "SystemRequests"]
