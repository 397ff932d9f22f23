module tutti.dev/tutti

go 1.19
