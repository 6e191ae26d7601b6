"""Reports of a failover test: the chart, Allure attachments and the run summary.

Kept free of imports on purpose: the proxies package imports ``report.samples`` and
should not pay for matplotlib or allure on the way.
"""
