module tutti.dev/samples/roundtrip

go 1.19

require tutti.dev/tutti v0.0.0

replace tutti.dev/tutti => ../../bindings/go
