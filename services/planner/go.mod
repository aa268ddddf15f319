module github.com/gantry-dev/gantry/services/planner

go 1.26.8
