# Thin wrappers over ./dev, which needs nothing but python3 and bash.
.PHONY: install test lint demo
install:
	./dev install
test:
	./dev test
lint:
	./dev lint
demo:
	./dev demo
