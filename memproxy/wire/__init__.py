"""What a client request is made of, read one way: headers, message text, JSON, times."""
