.PHONY: interceptor test-interceptor test-core
interceptor:
test-interceptor:
test-core:
