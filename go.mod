module github.com/runlog/runlog

go 1.26.8

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
