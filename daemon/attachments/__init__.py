"""The folder side of attachments: intake (folder to index), outflow (index to folder), their brake,
versions and status.
"""
