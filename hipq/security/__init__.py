"""Who may call hipq: API tokens and Standard Webhooks signatures."""
