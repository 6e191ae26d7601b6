"""Reports of a trial: the chart, Allure attachments and the run summary."""
