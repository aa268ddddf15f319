module github.com/gantry-dev/gantry/services/health-gate

go 1.26.8
